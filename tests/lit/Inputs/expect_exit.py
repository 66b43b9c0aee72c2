"""Runs a command that should fail, and checks its exit code.

    python expect_exit.py CODE -- CMD [ARGS...]

Runs CMD with its stdout and stderr merged, in order, into this script's
stdout (so that one FileCheck reads the error message), and exits 0 iff CMD
exited with CODE. Otherwise it says on stderr what it expected and what it
got, and exits 1. A command killed by a signal (a crash) never matches.
"""
import subprocess
import sys


def usage():
    sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
    sys.exit(2)


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        usage()
    try:
        want = int(argv[0])
    except ValueError:
        usage()
    cmd = argv[2:]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        sys.stderr.write(f"expect_exit: cannot run '{cmd[0]}': {e.strerror}\n")
        return 1
    sys.stdout.buffer.write(proc.stdout)
    sys.stdout.flush()
    got = proc.returncode
    if got == want:
        return 0
    how = f"was killed by signal {-got}" if got < 0 else f"exited with {got}"
    sys.stderr.write(f"expect_exit: expected exit code {want}, but the command {how}: "
                     f"{subprocess.list2cmdline(cmd)}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
