-- Step 11, ramdisk certificates (issue 20): the command kinds a certificate allows (spec 001
-- "allowedKinds": "stored on the certificate row, renewed with it"), comma-joined like
-- `nodes.allowed_kinds`; NULL means every kind the certificate's role allows. Written from
-- `node.certificate.issued` field 9; rows issued before this step keep NULL.

ALTER TABLE node_certs ADD COLUMN allowed_kinds TEXT;
