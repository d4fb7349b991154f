"""Learned HBA schedules shipped with hba_augment (installed as ``hba_augment.pretrained_policies``).

Each ``<name>.json`` here is the output of a real ``hba-augment search`` run, with its provenance.
"""
