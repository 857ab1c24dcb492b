"""The cortex_m op set: the ops a program of ours may call on the Cortex-M, stated once (``ops.py``: schemas,
registration, fake and ``.out`` kernels; ``shapes.py``: output shapes and layouts; ``reference.py``: the device
kernels' arithmetic). The CPU lowering emits them and the host runtime runs them, both from here."""
