"""``python -m espforensics``: the same as the ``espforensics`` command."""

from espforensics.cli import main

if __name__ == "__main__":  # not when a worker process of --jobs imports the main module
    main()
