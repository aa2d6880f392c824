"""The embedded default dataset: ``scene_render.py`` draws the scenes, ``synthetic.py`` writes them in
the PASCAL VOC layout (``python -m skipless.data.generator.synthetic``). Empty on purpose, so that running
``synthetic`` as a module does not find it already imported."""
