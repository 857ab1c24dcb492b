"""Memory stage: what a program needs of the target's SRAM and flash."""
