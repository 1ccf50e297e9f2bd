"""A training run: the execution plan and its memory estimate, the TRL trainer, the train-and-evaluate loop,
checkpoints, the output folder, W&B tracking, progress lines, the run summary and the loss curve. Imports
``evaluate`` and the layers below.
"""
