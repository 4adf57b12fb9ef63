"""``python -m cachedoctor`` runs the same CLI as the console script."""

from cachedoctor.cli import main

if __name__ == "__main__":
    main()
