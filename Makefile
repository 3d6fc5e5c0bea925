# attnmt — the two commands of the README, plus helpers.
#   make demo                 build the Bible corpus, train, translate, score, draw a heatmap
#   make demo CORPUS=dir      the same on your corpus: dir/{train,dev,test}.{SRC,TGT}, run runs/demo-dir
#   make test                 install what is missing and run the test suite
PYTHON ?= python3
CORPUS ?=
SRC ?= en
TGT ?= es
# One run per corpus and direction: `make demo` resumes its run (an interrupted demo or a longer
# BUDGET continues), so another corpus must not land in the Bible's run and silently reuse it.
CORPUS_NAME = $(subst /,_,$(patsubst /%,%,$(patsubst %/,%,$(CORPUS))))
RUN ?= runs/demo$(if $(CORPUS),-$(CORPUS_NAME))$(if $(filter-out en-es,$(SRC)-$(TGT)),-$(SRC)-$(TGT))
CONFIG ?= configs/demo.yaml
BUDGET ?= 680
BEAM ?= 5
STAMP := .make

DATA := $(if $(CORPUS),$(CORPUS),data/bible)
# the tokenised BLEU's language: TGT if the Moses tokenizer has rules for it, else score's default
# (a suffix such as the synthetic data's tgt is no language, and score refuses it as --lang).
# Expanded with demo's commands, after setup has installed attnmt.
BLEU_LANG = $(shell $(PYTHON) -c 'from attnmt.eval.scoring import bleu_lang; print(bleu_lang("$(TGT)"))')

.PHONY: demo test setup clean-demo

$(STAMP)/setup: pyproject.toml
	@mkdir -p $(STAMP)
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[serve,test]"
	@touch $@

setup: $(STAMP)/setup

demo: setup
ifeq ($(CORPUS),)
	$(PYTHON) -m attnmt data bible --out data/bible --install
endif
	$(PYTHON) -m attnmt train $(CONFIG) --out $(RUN) --resume --max-time $(BUDGET) \
	    --set data.train=$(DATA)/train --set data.dev=$(DATA)/dev --set data.src=$(SRC) --set data.tgt=$(TGT)
	$(PYTHON) -m attnmt translate --model $(RUN) --input $(DATA)/test.$(SRC) --output $(RUN)/test.hyp.$(TGT) \
	    --beam $(BEAM) --batch-size 64
	$(PYTHON) -m attnmt score --hyp $(RUN)/test.hyp.$(TGT) --ref $(DATA)/test.$(TGT) --lang $(BLEU_LANG)
	$(PYTHON) -m attnmt analyse heatmap --model $(RUN) --input "$$(head -n 1 $(DATA)/test.$(SRC))" \
	    --out $(RUN)/heatmap.png
	@echo "translations: $(RUN)/test.hyp.$(TGT)   heatmap: $(RUN)/heatmap.png"

test: setup
	bash .ci/test-deps
	$(PYTHON) -m pytest

clean-demo:
	rm -rf $(RUN)
