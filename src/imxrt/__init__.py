"""imxrt: compile a PyTorch model to an int8 ExecuTorch program for the NXP i.MX RT700."""
