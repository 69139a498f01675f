"""The suite, laid out as the repository: accumulator/ holds the library's own tests (they import no tool), the
other folders the tools' (training, data, models, benchmarks, tools: the scripts end to end) and the docs'.

A package, so that same-named files in different folders import by their dotted names (tests.training.test_mnist,
tests.models.test_mnist) and a msrun rank imports its case by name too.
"""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
