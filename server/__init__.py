"""The HTTP server: the FastAPI app, protocol adapters (native, KServe v2, TF Serving), metrics, traces."""
