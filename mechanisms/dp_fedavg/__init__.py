"""``dp_fedavg``: client-level DP-FedAvg (McMahan et al., ICLR 2018); see :mod:`privsilo.mechanisms.dp_fedavg.mechanism`."""
