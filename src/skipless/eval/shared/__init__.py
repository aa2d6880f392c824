"""What every evaluator uses: backbone items (``backbones``), output folders (``output_dirs``), report tables
(``report``), settings rules (``settings_rules``), devices, images (``images``, ``square_images``),
TensorBoard events (``tb_events``), the learning-rate sweep edge (``lr_sweep``) and the global
features k-NN and linear read (``global_features``, ``global_eval``). It imports no evaluator."""
