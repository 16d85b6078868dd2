# The lesson machinery (the --solution switch, the `lesson` and `model` fixtures,
# failure messages that name the task) lives in the kit's package.
pytest_plugins = ["sessionlab.pytest_plugin"]
