__version__ = "0.1.0"

# Major version of the plugin-facing API (hook specs, registration signatures, base classes).
# A plugin declares the one it targets as ``MICROFORMERS_API_VERSION`` in its entry-point module.
KERNEL_API_VERSION = 1
