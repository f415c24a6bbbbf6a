local t = redis.call('TIME')
return {redis.call('GET', adapt_key) or '', redis.call('GET', last_key) or '', tonumber(t[1]) * 1000000 + tonumber(t[2])}
