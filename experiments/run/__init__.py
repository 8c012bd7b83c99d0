"""One training run: the Hydra app, the training loop and what it is made of.

    train.py          `python -m experiments.train`: train(cfg), main (Hydra), cli
    loop.py           TrainingRun: the steps of one run (open the run dir, data, model, restore, track, loop)
    loss_module.py    LossModule: model.loss as the forward() the trainer steps, compiles, DDP-wraps and stacks
    restore.py        resume: a run continues from its latest checkpoint (weights, optimizer, counters, random states)
    pack.py           packed training: runs of one shape trained together in one process, each as if alone
    stacked.py        the shared forward/backward of a pack: vmap over the members' stacked parameters
    tasks.py          what differs between task=lm and task=seq2seq: data, model config, step cost, evaluation
    budget.py         how long a run trains (train.flops > train.tokens > train.steps) and what a step costs
    history.py        the last / best eval values summary.json reports
    precision.py      train.dtype: the autocast around the forward pass, and fp16's gradient scaler
    grad_norms.py     grad_norm/layer_{i}, per residual block
    optim.py          AdamW with weight decay on matrices
    schedule.py       learning-rate schedules as a pure function of the step
    distributed.py    DDP plumbing (rank, device, collectives)
    interrupt.py      Ctrl-C / SIGTERM as "stop after this step", for a run and a whole sweep
    keep_dirs.py      a single run that ends before writing its own files leaves its dirs as they were (.hydra/ too)
    eval_lm.py        validation loss / perplexity / bits per byte, attention entropy, length extrapolation
    eval_seq2seq.py   teacher-forced loss, token accuracy and exact match for seq2seq runs
    flops.py          peak FLOP/s of a device and MFU
"""
