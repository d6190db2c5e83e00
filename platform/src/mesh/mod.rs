//! Pure logic over the facts of every node: the cable map, the checks,
//! cabling plans and JACCL hostfiles. No I/O, no clock.
