"""What only the tools' tests need: a loopback web server for the downloads, the MNIST tool's one-line refusals."""
import contextlib
import functools
import http.server
import threading

import pytest

from scripts import train_mnist  # scripts/ has no __init__.py: a namespace package on pytest's path

# Port 9 (discard) on loopback: nothing listens, so the connection is refused at once.
UNREACHABLE_URL = "http://127.0.0.1:9/MNIST_Data.zip"


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


def refused(capsys, message, *argv):
    """``main(argv)`` ended with status 1 and ``error: <message>`` as its only output: nothing was trained."""
    with pytest.raises(SystemExit) as caught:
        train_mnist.main(list(argv))
    assert (caught.value.code, *capsys.readouterr()) == (1, "", f"error: {message}\n")
