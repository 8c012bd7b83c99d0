"""Sweeps (Hydra multirun): what happens around the jobs.

    job.py        what Hydra tells a job: multirun or not, its sweep dir, run dir, name, swept values
    records.py    where a sweep records a job that failed or never ran (and an index of every other place)
    resume.py     the commands that continue a stopped run or a stopped sweep
    callbacks.py  stop a sweep cleanly (SweepStop), build its report and say where its runs are (SweepReport)
    slurm.py      hydra/launcher=slurm, the submitting side: wait for the job array, record jobs the scheduler ended
    requeue.py    hydra/launcher=slurm, the job side: SIGUSR2 (time limit, preemption) -> checkpoint, requeue, resume
    slurm_check.py  hydra/launcher=slurm, before anything is written: its values, sbatch/srun/squeue on PATH
    tune.py       the tuned sweep (hydra/sweeper=tuned): each arm at its own best lr, then fresh seeds; with
                  tune_spec.py (the declaration), tune_select.py (best lr, widening), tune_confirm.py (the best lr
                  confirmed at the full budget), tuning_record.py (tuning.json)
"""
