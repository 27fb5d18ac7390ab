"""`python -m experiments` and the `nnbench` script: the command. A Ctrl-C while its modules load, before the
command's own handler is installed, is the one line any command says on one, and exit 130, not a traceback."""
import signal
import sys


def main() -> int:
    try:
        from experiments.cli import main as command  # here, under the guard: a Ctrl-C may land while it loads
    except KeyboardInterrupt:  # nothing was started: the command's line, said without loading anything more
        chosen = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        print(f"nnbench {chosen}".strip() + ": error: interrupted (Ctrl-C): what was finished is kept", file=sys.stderr)
        return 128 + signal.SIGINT
    return command()


if __name__ == "__main__":
    sys.exit(main())
