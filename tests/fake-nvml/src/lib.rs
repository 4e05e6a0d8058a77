// placeholder: the fake NVML library is built in the watchdog issue
