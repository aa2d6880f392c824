"""Values every reader, transform and metric of the suite shares, stated once.

- ImageNet statistics: DINO normalises every crop with them in pretraining and in its evaluations
  (``main_dino.py``, ``eval_linear.py``), and TokenCut / the dense probe feed DINO backbones the same way.
- The ignore label: 255 marks void pixels in PASCAL VOC masks (object boundaries) and is the value every
  reader maps unlabeled pixels to (ADE20K's 0, COCO-Stuff's unlabeled); losses and mIoU skip it.
"""

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
IGNORE_INDEX = 255
