"""The request core: the engine every frontend calls, and the path of a request through it.

A map of a unary request's journey (docs/architecture.md tells it at more length):

    frontend          decodes the wire into an InferRequest (types.py) and calls
    engine.py         Engine.infer_queued: the model version, then a
    queued_infer.py   QueuedSchedulerInfer, which is the request's
    admission.py      Admission: counted in flight, its shared-memory regions held, checked against the
                      config (request_checks.py), the BackendRequest built; then handed to its
    scheduling/       scheduler's `enqueue`, which answers `done` once, on the event loop:
    admission.py      `finish` (or `failed`) records it and ends it in its one way, and
    queued_infer.py   the response goes to the frontend's callback (`then`).

`Engine.infer` awaits the same object (for BLS and ensembles' steps); a model with a response cache is
looked up first (QueuedCachedInfer). A decoupled model's responses stream through streaming.py, which
admits the request with a response stream and hands it to the same `enqueue`. engine_client.py is the
protocol the frontends (and tools) see: EngineClient, QueuedInfer and their value types.
"""
