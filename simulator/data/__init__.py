"""Datasets, their federated partitions and their one-time download."""
from privsilo.simulator.data.datasets import DATASETS, Dataset, DatasetInfo, default_data_dir, load_dataset
from privsilo.simulator.data.fetch import FETCHABLE, fetch_dataset
from privsilo.simulator.data.partition import PARTITIONS, partition_indices

__all__ = ["DATASETS", "FETCHABLE", "PARTITIONS", "Dataset", "DatasetInfo", "default_data_dir", "fetch_dataset",
           "load_dataset", "partition_indices"]
