"""Single-dataset fits: submission (quote, calibration, the charged job), private tuning of
hyperparameters, and the privacy–utility planner (which spends nothing).

A new mechanism is one module in ``service.dp.mechanisms`` plus its name in the fit schema.
"""
