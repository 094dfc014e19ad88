"""The OpenAI API (`/v1`) for any model that follows the tensor convention; see frontend.py."""

from nereid.frontends.openai.frontend import PREFIX, OpenAIFrontend, openai_error_response

__all__ = ["PREFIX", "OpenAIFrontend", "openai_error_response"]
