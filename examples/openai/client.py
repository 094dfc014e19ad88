"""Call Nereid's OpenAI API with OpenAI's own Python client: a chat streamed token by token, a completion,
and embeddings compared by cosine similarity.

    pip install openai
    python examples/openai/client.py [--url http://localhost:8000/v1] [--text "hello world"]
"""

from __future__ import annotations

import argparse
import sys

import openai


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:8000/v1", help="the server's /v1 address")
    parser.add_argument("--text", default="hello world from the model server")
    args = parser.parse_args()
    # Nereid checks no key; the client insists on one
    client = openai.OpenAI(base_url=args.url, api_key="not-needed")
    try:
        print("models:", ", ".join(model.id for model in client.models.list()))
        print("chat (streamed): ", end="", flush=True)
        stream = client.chat.completions.create(
            model="tiny_chat", messages=[{"role": "user", "content": args.text}], stream=True, max_tokens=12
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                print(chunk.choices[0].delta.content, end="", flush=True)
        print()
        completion = client.completions.create(model="tiny_chat", prompt=args.text, echo=True, max_tokens=3)
        print("completion:", repr(completion.choices[0].text), "finish:", completion.choices[0].finish_reason)
        texts = [args.text, "hello world", "the red car on the road"]
        vectors = [item.embedding for item in client.embeddings.create(model="tiny_embed", input=texts).data]
        for text, vector in zip(texts[1:], vectors[1:], strict=True):
            similarity = sum(a * b for a, b in zip(vectors[0], vector, strict=True))
            print(f"similarity to {text!r}: {similarity:.3f}")
    except openai.APIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
