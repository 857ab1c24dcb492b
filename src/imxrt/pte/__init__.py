"""The ``.pte`` file as a program: ``reader.py`` reads and checks it, ``read_cost.py`` prices what a flatbuffer
reader would build from it first. It belongs to no device and not to the host runtime: the memory report, the
ETDump, the C header and the bundle read programs without loading the runtime."""
