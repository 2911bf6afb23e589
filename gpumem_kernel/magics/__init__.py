"""The user's commands: the %gpumem line and cell magics, their argument checking, and the command line (python -m
gpumem_kernel).
"""
