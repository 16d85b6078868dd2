"""Session Lab: the kit's own runtime (scripted model, town, lesson machinery, command line).

The lesson code itself lives in lessons/ and solutions/ and imports nothing from here.
"""

__version__ = "0.1.0"
