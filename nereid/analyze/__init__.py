"""`nereid analyze`: search a model's configuration for the best throughput within a latency budget.

The journey of one run: `space` lists the settings worth trying for each model (instances, batching,
the Python execution mode, ONNX Runtime threads); `search` walks them (`brute` or `quick`) as pure
functions of a measurer; `driver` loads each candidate into one running Nereid through the load API
with a config override; `measure` drives it with perf_analyzer or the built-in load generator
(`loadgen`) in stable windows; `checkpoint` keeps every measurement so an interrupted run resumes;
`output` writes the best configs as model folders and `report` the HTML page, plots and JSON.
"""
