-- Step 19, machines an operator can recognise (issue 45 item 1): what a node said about itself
-- at its last join, from `node.joined` field 17 (`report`): hostname, SMBIOS serials, GPU UUIDs
-- (comma-joined), the bcd version and the boot id. Claims, never compared and never binding;
-- NULL when the node did not send one (or joined before this step, until it joins again or the
-- table is rebuilt).

ALTER TABLE nodes ADD COLUMN hostname TEXT;
ALTER TABLE nodes ADD COLUMN product_serial TEXT;
ALTER TABLE nodes ADD COLUMN board_serial TEXT;
ALTER TABLE nodes ADD COLUMN chassis_serial TEXT;
ALTER TABLE nodes ADD COLUMN gpu_uuids TEXT;
ALTER TABLE nodes ADD COLUMN bcd_version TEXT;
ALTER TABLE nodes ADD COLUMN last_boot_id TEXT;
