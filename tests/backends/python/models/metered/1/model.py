"""Custom metrics from a Python model: a counter with labels, a gauge and a histogram, updated per request;
each response also carries the refusals of operations that a metric's kind does not allow."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily
        self.requests = family("metered_requests", "Requests seen by the model", family.COUNTER)
        self.count = self.requests.Metric(labels={"model": "metered", "kind": "all"})
        self.last = family("metered_last_value", "The last value seen", family.GAUGE)
        self.gauge = self.last.Metric()
        self.values = family("metered_values", "Values seen", family.HISTOGRAM)
        self.histogram = self.values.Metric(labels={"model": "metered"}, buckets=[1.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.count.increment(1)
            if self.gauge is not None:
                self.gauge.set(value)
            self.histogram.observe(value)
            errors = []
            for attempt in (
                lambda: self.count.set(1.0),
                lambda: self.histogram.value(),
                lambda: pb_utils.MetricFamily("metered_requests", "again", pb_utils.MetricFamily.GAUGE),
            ):
                try:
                    attempt()
                    errors.append("")
                except pb_utils.TritonModelException as exc:
                    errors.append(str(exc))
            if value < 0:  # the gauge's family goes away: its metric with it
                gauge, self.gauge = self.gauge, None
                del self.last
                try:
                    gauge.set(1.0)
                    errors[0] = "a deleted family's metric still works"
                except pb_utils.TritonModelException as exc:
                    errors[0] = str(exc)
            outputs = [
                pb_utils.Tensor("COUNT", np.array([self.count.value()], dtype=np.float64)),
                pb_utils.Tensor("ERRORS", np.array(errors, dtype=np.object_)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
