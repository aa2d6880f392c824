"""What a pretraining run needs around the DINO LightningModule: data, callbacks, checkpoint I/O."""
