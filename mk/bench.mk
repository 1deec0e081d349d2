# Benchmarks: figures, never pass/fail. Each script writes bench/results/<name>.json.
.PHONY: bench

bench: ## run every benchmark (CPU; the GPU ones record "skipped" without CUDA) and summarise
	$(PY) bench/trainer_throughput.py
	$(PY) bench/pipeline_bubble.py
	$(PY) bench/hetero_memory.py
	$(PY) bench/async_checkpoint.py
	$(PY) bench/gpu.py
	$(PY) bench/operator_scale.py
	$(PY) bench/admission.py --cluster
	$(PY) bench/api_load.py --jobs 100 --pods-per-job 4 --label 100_jobs
	$(PY) bench/api_load.py --jobs 1000 --pods-per-job 8 --label 1000_jobs
	@for f in bench/results/*.json; do echo "== $$f"; cat $$f; done
