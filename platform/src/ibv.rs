//! rdma-core's `ibv_devices` and `ibv_devinfo [-v]` output, the same on
//! macOS and Linux: devices, ports, state, active width and speed, GIDs.
//! (Owned by the parser work of issue #4.)
