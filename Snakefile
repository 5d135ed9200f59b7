# heterospec: heterogeneous speculative inference, reproduced.
#   snakemake --cores all                                   the embedded default experiment
#   snakemake --cores all --config experiment=ci            another experiment (conf/experiment/*.yaml)
#   snakemake --cores all --config experiment=ci overrides="hardware@system.draft=v80 eval_limit=50"
# Results land in results/<run>/ (run = experiment, or experiment+hash when overrides are given);
# query them with: heterospec query "SELECT * FROM accuracy"
from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/common.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/quantize.smk"
include: "workflow/rules/hls.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/serving.smk"
include: "workflow/rules/dfvg.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


report: "workflow/report/workflow.rst"


rule all:
    input:
        run_outputs(),
