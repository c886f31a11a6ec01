-- in_slice: whether a slice key lies in the slice a `slice: statement` module runs for (the variables
-- slice_lo, slice_hi, which the modules that call it declare; NULL: open-ended), its bounds constants a
-- table scan's zone maps compare with (a coalesce over the column would read every row group).
--
-- builds:  in_slice
-- inputs:  (none)
-- columns: (a scalar macro: BOOLEAN)
CREATE MACRO in_slice(key) AS key >= coalesce(getvariable('slice_lo'), -9223372036854775808)
    AND key < coalesce(getvariable('slice_hi'), 9223372036854775807);
