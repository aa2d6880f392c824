"""What every training run needs around its LightningModule, for any method (DINO, MAE, the supervised
classifier): trainer, loaders, callbacks, the step's start, run folders, resume, checkpoint I/O."""
