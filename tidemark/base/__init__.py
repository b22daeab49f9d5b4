"""What every stage stands on and that knows nothing of the pipeline.

UTC instants as text (times), human durations (durations), JSON logs (logs), the one poll loop
(polling), time per phase (phases), names shared with Terraform (names), the checked formats of
partition values (layout), the one SparkSession builder (spark) and the named points where a kill
test ends a process (crashpoints). Imports nothing else of tidemark's.
"""
