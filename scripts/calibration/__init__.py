"""Scripts that fit the embedded estimators' constants on data the embedded benchmark never uses.

``CALIBRATION_VOICES`` are espeak-ng voices reserved for fitting the tools; the benchmark generator
must use none of them (a test checks), so no estimator is fitted on benchmark audio.
"""

CALIBRATION_VOICES = ("en-us-nyc", "en-gb-x-gbclan+m2", "en-gb-x-gbcwmd+f1", "en+klatt3", "en-us+f3", "en-gb+m6")
