"""dtjob operator: turns DistributedTrainingJob resources into gangs of training pods."""
