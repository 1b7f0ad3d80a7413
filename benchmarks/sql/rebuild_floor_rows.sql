-- The final rows of the identity projections after the identity benchmark's 1,007,271-event log
-- (`commands/benches/identity.rs`: 125,000 nodes, each joined with a token of 100 uses, its
-- certificate, two renewals with their proofs and certificates): 125,000 `nodes`, 375,000
-- `node_certs` with 544-byte DER, 250,000 `attestation_uses`, 125,000 `join_token_uses`, 1,250
-- `join_tokens`. Written to UNLOGGED staging tables; `floors.sh` then copies them into the real,
-- indexed tables server-side: the least work any rebuild of that log must make the database do.
CREATE UNLOGGED TABLE s_nodes AS SELECT * FROM nodes WITH NO DATA;
INSERT INTO s_nodes SELECT 'node_syn_'||lpad(g::text,12,'0'),'syn','site-1','pool-1','node','active',NULL,1,'join-token','unattested','tok_syn_'||lpad(((g-1)/100*100)::text,12,'0'),NULL,NULL,NULL,g,g,7,g*8 FROM generate_series(1,125000) g;
CREATE UNLOGGED TABLE s_certs AS SELECT * FROM node_certs WITH NO DATA;
INSERT INTO s_certs (serial,node_id,identity_generation,der,not_before_us,not_after_us,issued_position) SELECT lpad(to_hex(g),32,'0'),'node_syn_'||lpad(((g+2)/3)::text,12,'0'),1,decode(repeat(md5(g::text),34),'hex'),g,g+86400000000,g*3 FROM generate_series(1,375000) g;
CREATE UNLOGGED TABLE s_uses AS SELECT * FROM attestation_uses WITH NO DATA;
INSERT INTO s_uses SELECT 'renew-pop', decode(lpad(to_hex(g),16,'0')||'aa'||repeat('00',23),'hex'),'node_syn_'||lpad(((g+1)/2)::text,12,'0'),g,g+120000000,g*4 FROM generate_series(1,250000) g;
CREATE UNLOGGED TABLE s_tuses AS SELECT * FROM join_token_uses WITH NO DATA;
INSERT INTO s_tuses SELECT 'tok_syn_'||lpad(((g-1)/100*100)::text,12,'0'), (g-1)%100+1, 'node_syn_'||lpad(g::text,12,'0'), g, g*8 FROM generate_series(1,125000) g;
CREATE UNLOGGED TABLE s_tokens AS SELECT * FROM join_tokens WITH NO DATA;
INSERT INTO s_tokens SELECT 'tok_syn_'||lpad((g*100)::text,12,'0'),'syn','site-1','pool-1','node',sha256(g::text::bytea),100,0,g+86400000000,NULL,NULL,false,g,NULL,NULL,101,g*800 FROM generate_series(0,1249) g;
VACUUM ANALYZE s_nodes, s_certs, s_uses, s_tuses, s_tokens;
