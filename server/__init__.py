"""The HTTP server (FastAPI): comes with the server issue."""
