# Emulates route_token_warp's top-k lists (branch topk-lists, docs/perf/2026-12-02-h200-r26.md) lane by lane
# and checks them against the reference order (ordered bits descending, then the lower expert index).
import random
def ref(keys, K):
    # keys: list of ordered bits per expert (0 = none); select K by (bits desc, index asc)
    cand=[(b,-e) for e,b in enumerate(keys) if b>0]
    cand.sort(reverse=True)
    out=[-e for b,e in cand[:K]]
    return out+[-1]*(K-len(out))
def sim(keys, K, E):
    L=32; J=32
    bits=[[ (keys[l+32*j] if l+32*j<E else 0) for j in range(J)] for l in range(L)]
    out=[0]*L
    head=[0]*L; second=[0]*L; he=list(range(L)); se=list(range(L))
    build=[True]*L; known=[False]*L
    res=[]
    for k in range(K):
        for l in range(L):
            if build[l]:
                h=s=0
                for j in range(J):
                    b=0 if (out[l]>>j)&1 else bits[l][j]
                    ah=b>h; as_=b>s
                    s_new = h if ah else (b if as_ else s)
                    se_new = he[l] if ah else (l+32*j if as_ else se[l])
                    s=s_new; se[l]=se_new
                    if ah: h=b; he[l]=l+32*j
                head[l]=h; second[l]=s; build[l]=False; known[l]=True
        top=max(head)
        idx=min(he[l] if head[l]==top else 0xFFFFFFFF for l in range(L))
        best=-1 if top==0 else idx
        res.append(best)
        for l in range(L):
            if best>=0 and best==he[l]:
                out[l]|=1<<(he[l]//32)
                if known[l]: head[l]=second[l]; he[l]=se[l]; known[l]=False
                else: build[l]=True
    return res
random.seed(1)
n=0
for trial in range(3000):
    E=random.choice([8,16,64,128,256,512,1000,1024])
    K=random.randint(1,min(32,E))
    mode=trial%4
    if mode==0: keys=[random.randint(1,2**32-1) for _ in range(E)]
    elif mode==1: keys=[random.randint(0,5) for _ in range(E)]        # many ties and non-candidates
    elif mode==2: keys=[random.choice([0,1,7,7,7,9]) for _ in range(E)]
    else:
        keys=[random.randint(1,100) for _ in range(E)]
        # concentrate winners in one lane
        for j in range(min(32,(E+31)//32)):
            if j*32+5<E: keys[j*32+5]=1000+j
    r=ref(keys,K); s=sim(keys,K,E)
    assert r==s,(trial,E,K,r,s)
    n+=1
print("ok",n)
