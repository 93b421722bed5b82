"""Study layer: what a study is: the YAML file validated into a `StudySpec` (`config`) and the
`RunSpec`s it expands to. May import the run, the registries and the backends' names; it runs nothing.
"""
