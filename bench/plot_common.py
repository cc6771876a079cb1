"""What the plotting scripts share: argument check and a headless matplotlib."""
import sys


def pyplot_or_exit_code(argv, doc):
    """(pyplot, None) when argv is [script, input, output] and matplotlib loads; otherwise
    (None, exit code): 2 for a usage error (doc printed), 3 when matplotlib is missing."""
    if len(argv) != 3:
        print(doc, file=sys.stderr)
        return None, 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed", file=sys.stderr)
        return None, 3
    return plt, None
