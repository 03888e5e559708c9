"""What is done with the programs: sampling and posteriors (algorithms), training and checkpoints, the papers'
evaluations, the commands' thin shells (commands) and the notebook API (api, public as ``import entitylm``)."""
