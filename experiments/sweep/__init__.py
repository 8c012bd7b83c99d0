"""Sweeps (Hydra multirun): what happens around the jobs.

    callbacks.py  stop a sweep cleanly (SweepStop), build its report and say where its runs are (SweepReport)
"""
