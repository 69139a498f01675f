"""What only the tools' tests need: a loopback web server for the downloads."""
import contextlib
import functools
import http.server
import threading


@contextlib.contextmanager
def serving(folder):
    """Serves ``folder`` over HTTP on a free loopback port for the block; yields its base address."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
