"""The PostgreSQL source dialect: LSN watermarks, pgoutput decoded from a logical slot."""
