"""MNIST on disk (``data.idx``: the idx files) and as MindSpore pipelines (``data.mnist``)."""
