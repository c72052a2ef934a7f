"""The package version, importable by any stage without importing the package."""
__version__ = "0.1.0"
