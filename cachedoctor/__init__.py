"""cachedoctor: audit and repair the on-disk caches that diffusion-model trainers build.

The quick path (``cachedoctor scan``) imports neither torch nor numpy: cache files are read as
bytes and their pickles through a restricted unpickler that only records names.
"""

__version__ = "0.2.0"
