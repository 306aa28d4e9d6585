"""``python -m demo_client``."""

from demo_client.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
