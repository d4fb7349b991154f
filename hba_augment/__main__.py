"""``python -m hba_augment``: the ``hba-augment`` command."""

import sys

from hba_augment.cli import main

if __name__ == "__main__":
    sys.exit(main())
