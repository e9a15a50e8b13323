-- A workspace's scheduling weight (issue 28, item 1): its share of a server process's
-- contended resources, database connections and model calls, against other workspaces'
-- (memplane.server.quota.fair: start-time fair queuing by workspace). 0 means the
-- default, 1; weight 2 gets twice the share of weight 1 while both wait.
ALTER TABLE workspaces
    ADD COLUMN scheduling_weight integer NOT NULL DEFAULT 0 CHECK (scheduling_weight BETWEEN 0 AND 1000);
