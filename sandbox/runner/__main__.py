"""Entry point: ``python3 -I -S -B /opt/gym/sandbox/runner`` in the image (`python3 -m sandbox.runner` here).

Run as a directory, Python puts that directory itself first on sys.path, under -I too (-I keeps only a
script file's directory off it): the runner's modules would be importable by their bare names, where one
named like a stdlib module would shadow it, and `sandbox` would not be importable at all. So the
directory's entry goes, and the folder that holds `sandbox/` (/opt/gym) comes last: the standard library
is found first, also for the modules the runner imports on first use (tarfile, heapq, resource).
"""

import os
import sys


def run():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == here:
        del sys.path[0]
        sys.path.append(os.path.dirname(os.path.dirname(here)))
    from sandbox.runner.serve import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
